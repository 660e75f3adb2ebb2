//! Segment files: a flushed buffer, immutable, checksummed, with its index
//! and per-leaf aggregates.
//!
//! Layout (all integers little-endian; format in the crate's DESIGN.md):
//!
//! ```text
//! leaf 0 | leaf 1 | ... | meta block | footer (FOOTER_BYTES)
//! leaf:       records sorted by (key, time, seq), each
//!             key u64 | time u64 | seq u64 | value length u32 | value
//! meta block: a summary per leaf (SUMMARY_BYTES each), then the shadows
//!             (key u64 | time u64 | seq u64 each)
//! ```
//!
//! Every leaf and the meta block carry a [`block_crc`] seeded with the
//! segment's id and the block's offset; the footer carries a CRC32C of
//! itself. A reader keeps the summaries (the serialized index: a binary
//! search over the leaves' key ranges stands for the internal nodes) and
//! reads leaves on demand.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use spillway_core::sync;
use spillway_core::{block_crc, crc32c, verify_block, Error, Fs, FsFile, Result};

use crate::cache::{Cache, Resident};
use crate::records::{Aggregate, Bounds, Records, Shadow};

const MAGIC: &[u8; 8] = b"SPWSEGv1";
/// Version 2 added the store id to the footer and a second part of the
/// sum to each leaf's summary.
const VERSION: u32 = 2;
/// Footer: magic, version, leaf records, id, store id, first seq, last
/// seq, records, leaves, shadows, meta offset, meta length, meta crc,
/// footer crc.
pub const FOOTER_BYTES: usize = 8 + 4 + 4 + 9 * 8 + 4 + 4;
/// A leaf's summary in the meta block.
const SUMMARY_BYTES: usize = 8 + 4 + 4 + 4 + 4 + 8 * 4 + 8 * 4;
const SHADOW_BYTES: usize = 24;
/// A record's fixed part in a leaf.
const RECORD_HEADER_BYTES: usize = 28;

/// A leaf's place in its file and what it holds: the segment's index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeafSummary {
    /// Where the leaf starts in the file.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u32,
    /// Its [`block_crc`].
    pub crc: u32,
    /// Lowest and highest key.
    pub first_key: u64,
    /// Highest key.
    pub last_key: u64,
    /// Earliest time.
    pub time_min: u64,
    /// Latest time.
    pub time_max: u64,
    /// Count, sum, min and max of its records.
    pub aggregate: Aggregate,
}

/// What a segment holds, from its footer and meta block.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentMeta {
    /// The segment's id (its file's number).
    pub id: u64,
    /// The id of the store it belongs to (a file from another store is
    /// refused).
    pub store_id: u64,
    /// Sequence numbers of the writes it holds: `first_seq..=last_seq`.
    pub first_seq: u64,
    /// Last sequence number.
    pub last_seq: u64,
    /// Live records.
    pub records: u64,
    /// Records per leaf (the last leaf may hold fewer).
    pub leaf_records: u32,
    /// The leaves' summaries, in key order.
    pub leaves: Vec<LeafSummary>,
    /// Updates and deletes, which hide older segments' records, sorted.
    pub shadows: Vec<Shadow>,
    /// The file's length.
    pub bytes: u64,
}

impl SegmentMeta {
    /// Lowest and highest key, earliest and latest time, if it holds records.
    pub fn ranges(&self) -> Option<(u64, u64, u64, u64)> {
        let first = self.leaves.first()?;
        let last = self.leaves.last()?;
        let time_min = self.leaves.iter().map(|leaf| leaf.time_min).min()?;
        let time_max = self.leaves.iter().map(|leaf| leaf.time_max).max()?;
        Some((first.first_key, last.last_key, time_min, time_max))
    }

    /// Lowest and highest key, earliest and latest time of its records
    /// and its shadows: every query it can change the answer of selects
    /// something in these ranges. `None` when it holds neither.
    pub fn extent(&self) -> Option<Extent> {
        let records = self.ranges();
        let shadows = self.shadows.iter().fold(None, |extent: Option<Extent>, shadow| {
            let point = Extent {
                key_min: shadow.key,
                key_max: shadow.key,
                time_min: shadow.time,
                time_max: shadow.time,
            };
            Some(extent.map_or(point, |extent| extent.union(&point)))
        });
        let records = records.map(|(key_min, key_max, time_min, time_max)| Extent {
            key_min,
            key_max,
            time_min,
            time_max,
        });
        match (records, shadows) {
            (Some(a), Some(b)) => Some(a.union(&b)),
            (a, b) => a.or(b),
        }
    }

    /// The leaves that may hold keys in `low..=high`.
    pub fn leaves_for(&self, low: u64, high: u64) -> Range<usize> {
        let start = self.leaves.partition_point(|leaf| leaf.last_key < low);
        let end = self.leaves.partition_point(|leaf| leaf.first_key <= high);
        start..end.max(start)
    }

    /// The records of leaves `leaves` within the decoded records.
    pub fn record_range(&self, leaves: Range<usize>) -> Range<usize> {
        let per_leaf = self.leaf_records as usize;
        let end = (leaves.end * per_leaf).min(self.records as usize);
        (leaves.start * per_leaf).min(end)..end
    }
}

/// The key and time ranges a segment's records and shadows lie in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Lowest key.
    pub key_min: u64,
    /// Highest key.
    pub key_max: u64,
    /// Earliest time.
    pub time_min: u64,
    /// Latest time.
    pub time_max: u64,
}

impl Extent {
    /// The smallest extent holding both.
    pub fn union(&self, other: &Extent) -> Extent {
        Extent {
            key_min: self.key_min.min(other.key_min),
            key_max: self.key_max.max(other.key_max),
            time_min: self.time_min.min(other.time_min),
            time_max: self.time_max.max(other.time_max),
        }
    }
}

/// The file name of segment `id`.
pub fn file_name(id: u64) -> String {
    format!("{id:012}.seg")
}

/// Writes `records` (sorted by (key, time, seq), resolved) and `shadows`
/// as segment `id` of store `store_id` at `path`, synced, in leaves of
/// `leaf_records`. Returns its meta. The caller syncs the directory and
/// announces it.
#[allow(clippy::too_many_arguments)] // the footer's fields, each its own
pub fn write(
    fs: &dyn Fs,
    path: &Path,
    id: u64,
    store_id: u64,
    seqs: (u64, u64),
    records: &Records,
    shadows: &[Shadow],
    leaf_records: usize,
) -> Result<SegmentMeta> {
    assert!(leaf_records > 0);
    let mut bytes = Vec::with_capacity(records.heap_bytes() + records.len() * 4 + 4096);
    let mut leaves = Vec::with_capacity(records.len().div_ceil(leaf_records));
    for start in (0..records.len()).step_by(leaf_records) {
        let end = (start + leaf_records).min(records.len());
        let offset = bytes.len() as u64;
        for i in start..end {
            debug_assert!(i == start || records.order(i - 1) <= records.order(i));
            let value = records.value(i);
            bytes.extend_from_slice(&records.keys[i].to_le_bytes());
            bytes.extend_from_slice(&records.times[i].to_le_bytes());
            bytes.extend_from_slice(&records.seqs[i].to_le_bytes());
            bytes.extend_from_slice(&(value.len() as u32).to_le_bytes());
            bytes.extend_from_slice(value);
        }
        leaves.push(LeafSummary {
            offset,
            len: (bytes.len() as u64 - offset) as u32,
            crc: block_crc(id, offset, &bytes[offset as usize..]),
            ..summarize(records, start..end)
        });
    }
    let meta_offset = bytes.len() as u64;
    for leaf in &leaves {
        encode_summary(leaf, &mut bytes);
    }
    for shadow in shadows {
        for field in [shadow.key, shadow.time, shadow.seq] {
            bytes.extend_from_slice(&field.to_le_bytes());
        }
    }
    let meta_len = bytes.len() as u64 - meta_offset;
    let meta_crc = block_crc(id, meta_offset, &bytes[meta_offset as usize..]);
    let footer_start = bytes.len();
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&(leaf_records as u32).to_le_bytes());
    for field in [
        id,
        store_id,
        seqs.0,
        seqs.1,
        records.len() as u64,
        leaves.len() as u64,
        shadows.len() as u64,
        meta_offset,
        meta_len,
    ] {
        bytes.extend_from_slice(&field.to_le_bytes());
    }
    bytes.extend_from_slice(&meta_crc.to_le_bytes());
    let footer_crc = crc32c(&bytes[footer_start..]);
    bytes.extend_from_slice(&footer_crc.to_le_bytes());
    debug_assert_eq!(bytes.len() - footer_start, FOOTER_BYTES);

    let file = fs.create_or_truncate(path)?;
    file.write_at(&bytes, 0)?;
    file.sync_data()?;
    Ok(SegmentMeta {
        id,
        store_id,
        first_seq: seqs.0,
        last_seq: seqs.1,
        records: records.len() as u64,
        leaf_records: leaf_records as u32,
        leaves,
        shadows: shadows.to_vec(),
        bytes: bytes.len() as u64,
    })
}

/// The summary of records `rows` as a leaf (its place in a file left 0).
fn summarize(records: &Records, rows: Range<usize>) -> LeafSummary {
    let mut aggregate = Aggregate::default();
    for i in rows.clone() {
        aggregate.add(records.value(i));
    }
    let times = &records.times[rows.clone()];
    LeafSummary {
        offset: 0,
        len: 0,
        crc: 0,
        first_key: records.keys[rows.start],
        last_key: records.keys[rows.end - 1],
        time_min: times.iter().copied().min().unwrap_or(0),
        time_max: times.iter().copied().max().unwrap_or(0),
        aggregate,
    }
}

/// The meta of records held only in memory (sorted by (key, time, seq),
/// resolved), in leaves of `leaf_records` as [`write`] would cut them:
/// what a tier of merged segments answers queries with.
pub(crate) fn meta_in_memory(
    seqs: (u64, u64),
    records: &Records,
    shadows: Vec<Shadow>,
    leaf_records: usize,
) -> SegmentMeta {
    assert!(leaf_records > 0);
    let leaves = (0..records.len())
        .step_by(leaf_records)
        .map(|start| summarize(records, start..(start + leaf_records).min(records.len())))
        .collect();
    SegmentMeta {
        id: u64::MAX,
        store_id: 0,
        first_seq: seqs.0,
        last_seq: seqs.1,
        records: records.len() as u64,
        leaf_records: leaf_records as u32,
        leaves,
        shadows,
        bytes: records.heap_bytes() as u64,
    }
}

fn encode_summary(leaf: &LeafSummary, out: &mut Vec<u8>) {
    out.extend_from_slice(&leaf.offset.to_le_bytes());
    out.extend_from_slice(&leaf.len.to_le_bytes());
    out.extend_from_slice(&leaf.crc.to_le_bytes());
    out.extend_from_slice(&(leaf.aggregate.count as u32).to_le_bytes());
    out.extend_from_slice(&(leaf.aggregate.numeric as u32).to_le_bytes());
    for field in [leaf.first_key, leaf.last_key, leaf.time_min, leaf.time_max] {
        out.extend_from_slice(&field.to_le_bytes());
    }
    let [sum_small, sum_large] = leaf.aggregate.sum_parts();
    for field in [sum_small, sum_large, leaf.aggregate.min, leaf.aggregate.max] {
        out.extend_from_slice(&field.to_le_bytes());
    }
}

/// A little-endian reader over a block that fails, never panics, past its end.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let slice = self.bytes.get(self.at..self.at.checked_add(len)?)?;
        self.at += len;
        Some(slice)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn f64(&mut self) -> Option<f64> {
        Some(f64::from_bits(self.u64()?))
    }
}

/// Decodes and checks a segment's footer and meta block from the file's
/// `tail` (at least its last `FOOTER_BYTES`, and the meta block if the
/// caller read it: [`decode_meta`] says where it is).
struct Footer {
    leaf_records: u32,
    id: u64,
    store_id: u64,
    first_seq: u64,
    last_seq: u64,
    records: u64,
    leaves: u64,
    shadows: u64,
    meta_offset: u64,
    meta_len: u64,
    meta_crc: u32,
}

fn decode_footer(path: &Path, file_len: u64, footer: &[u8]) -> Result<Footer> {
    let at = file_len.saturating_sub(FOOTER_BYTES as u64);
    let corrupt = |what: &str| Error::corruption(path, at, format!("segment footer: {what}"));
    if file_len < FOOTER_BYTES as u64 || footer.len() != FOOTER_BYTES {
        return Err(corrupt(&format!(
            "file of {file_len} bytes is shorter than a footer"
        )));
    }
    let stored = u32::from_le_bytes(footer[FOOTER_BYTES - 4..].try_into().expect("4 bytes"));
    if crc32c(&footer[..FOOTER_BYTES - 4]) != stored {
        if is_version_1(footer) {
            return Err(corrupt(
                "format version 1 (written by an older Spillway); this build reads version 2",
            ));
        }
        return Err(corrupt("checksum mismatch"));
    }
    let mut cursor = Cursor { bytes: footer, at: 0 };
    let bad = || corrupt("truncated");
    if cursor.take(8) != Some(MAGIC.as_slice()) {
        return Err(corrupt("not a segment file (bad magic)"));
    }
    let version = cursor.u32().ok_or_else(bad)?;
    if version != VERSION {
        return Err(corrupt(&format!("version {version}, this build reads {VERSION}")));
    }
    let leaf_records = cursor.u32().ok_or_else(bad)?;
    let mut fields = [0u64; 9];
    for field in &mut fields {
        *field = cursor.u64().ok_or_else(bad)?;
    }
    let [id, store_id, first_seq, last_seq, records, leaves, shadows, meta_offset, meta_len] = fields;
    let meta_crc = cursor.u32().ok_or_else(bad)?;
    let footer = Footer {
        leaf_records,
        id,
        store_id,
        first_seq,
        last_seq,
        records,
        leaves,
        shadows,
        meta_offset,
        meta_len,
        meta_crc,
    };
    let expected_meta = leaves
        .checked_mul(SUMMARY_BYTES as u64)
        .and_then(|bytes| bytes.checked_add(shadows.checked_mul(SHADOW_BYTES as u64)?));
    if leaf_records == 0
        || expected_meta != Some(meta_len)
        || meta_offset.checked_add(meta_len) != Some(at)
        || leaves
            .checked_mul(leaf_records as u64)
            .is_none_or(|cap| cap < records)
        || records
            < leaves
                .saturating_sub(1)
                .saturating_mul(leaf_records as u64)
                .saturating_add(leaves.min(1))
        || first_seq > last_seq
    {
        return Err(corrupt(
            "fields disagree with each other or with the file's length",
        ));
    }
    Ok(footer)
}

/// Bytes of a version 1 footer (no store id).
const FOOTER_V1_BYTES: usize = FOOTER_BYTES - 8;

/// Whether the last bytes of `footer` (a file's last [`FOOTER_BYTES`]) are
/// a whole version 1 footer.
fn is_version_1(footer: &[u8]) -> bool {
    let Some(old) = footer.get(footer.len().saturating_sub(FOOTER_V1_BYTES)..) else {
        return false;
    };
    old.len() == FOOTER_V1_BYTES
        && old.starts_with(MAGIC)
        && old[8..12] == 1u32.to_le_bytes()
        && crc32c(&old[..FOOTER_V1_BYTES - 4]).to_le_bytes() == old[FOOTER_V1_BYTES - 4..]
}

fn decode_meta(path: &Path, footer: &Footer, meta: &[u8]) -> Result<(Vec<LeafSummary>, Vec<Shadow>)> {
    verify_block(path, footer.id, footer.meta_offset, meta, footer.meta_crc)?;
    let corrupt =
        |what: String| Error::corruption(path, footer.meta_offset, format!("segment index: {what}"));
    let mut cursor = Cursor { bytes: meta, at: 0 };
    let truncated = || corrupt("truncated".into());
    let mut leaves = Vec::with_capacity(footer.leaves as usize);
    let mut expected_offset = 0u64;
    for number in 0..footer.leaves {
        let offset = cursor.u64().ok_or_else(truncated)?;
        let len = cursor.u32().ok_or_else(truncated)?;
        let crc = cursor.u32().ok_or_else(truncated)?;
        let count = cursor.u32().ok_or_else(truncated)? as u64;
        let numeric = cursor.u32().ok_or_else(truncated)? as u64;
        let mut keys_times = [0u64; 4];
        for field in &mut keys_times {
            *field = cursor.u64().ok_or_else(truncated)?;
        }
        let [first_key, last_key, time_min, time_max] = keys_times;
        let (sum_small, sum_large, min, max) = (
            cursor.f64().ok_or_else(truncated)?,
            cursor.f64().ok_or_else(truncated)?,
            cursor.f64().ok_or_else(truncated)?,
            cursor.f64().ok_or_else(truncated)?,
        );
        // Numbers are finite, so are sums (in two parts); min and max
        // are infinite exactly when there is no number.
        let numbers_fit = sum_small.is_finite()
            && sum_large.is_finite()
            && if numeric == 0 {
                min == f64::INFINITY && max == f64::NEG_INFINITY && sum_small == 0.0 && sum_large == 0.0
            } else {
                min.is_finite() && max.is_finite() && min <= max
            };
        let expected_count = if number + 1 < footer.leaves {
            footer.leaf_records as u64
        } else {
            footer.records - number * footer.leaf_records as u64
        };
        ensure_leaf(
            offset == expected_offset
                && count == expected_count
                && numeric <= count
                && numbers_fit
                && first_key <= last_key
                && time_min <= time_max
                && leaves
                    .last()
                    .is_none_or(|prev: &LeafSummary| prev.last_key <= first_key)
                && (len as u64) >= count * RECORD_HEADER_BYTES as u64,
            || corrupt(format!("leaf {number}'s summary is inconsistent")),
        )?;
        expected_offset = offset + len as u64;
        leaves.push(LeafSummary {
            offset,
            len,
            crc,
            first_key,
            last_key,
            time_min,
            time_max,
            aggregate: Aggregate {
                count,
                numeric,
                min,
                max,
                sum_small,
                sum_large,
            },
        });
    }
    if expected_offset != footer.meta_offset {
        return Err(corrupt("the leaves do not end where the index starts".into()));
    }
    let mut shadows = Vec::with_capacity(footer.shadows as usize);
    for _ in 0..footer.shadows {
        let shadow = Shadow {
            key: cursor.u64().ok_or_else(truncated)?,
            time: cursor.u64().ok_or_else(truncated)?,
            seq: cursor.u64().ok_or_else(truncated)?,
        };
        if shadows.last().is_some_and(|prev| *prev >= shadow) {
            return Err(corrupt("shadows out of order".into()));
        }
        shadows.push(shadow);
    }
    Ok((leaves, shadows))
}

fn ensure_leaf(condition: bool, error: impl FnOnce() -> Error) -> Result<()> {
    if condition {
        Ok(())
    } else {
        Err(error())
    }
}

/// Decodes the records of leaves `leaves` from `bytes`, which start at
/// the first leaf's offset, checking each leaf's checksum and summary.
fn decode_leaves(
    path: &Path,
    meta: &SegmentMeta,
    leaves: Range<usize>,
    bytes: &[u8],
    out: &mut Records,
) -> Result<()> {
    let Some(base) = meta.leaves.get(leaves.start).map(|leaf| leaf.offset) else {
        return Ok(());
    };
    for number in leaves {
        let leaf = &meta.leaves[number];
        let start = (leaf.offset - base) as usize;
        let corrupt =
            |what: &str| Error::corruption(path, leaf.offset, format!("segment leaf {number}: {what}"));
        let block = bytes
            .get(start..start + leaf.len as usize)
            .ok_or_else(|| corrupt("past the end of the file"))?;
        verify_block(path, meta.id, leaf.offset, block, leaf.crc)?;
        let mut cursor = Cursor { bytes: block, at: 0 };
        let mut previous = None;
        for _ in 0..leaf.aggregate.count {
            let truncated = || corrupt("truncated record");
            let (key, time, seq) = (
                cursor.u64().ok_or_else(truncated)?,
                cursor.u64().ok_or_else(truncated)?,
                cursor.u64().ok_or_else(truncated)?,
            );
            let len = cursor.u32().ok_or_else(truncated)?;
            let value = cursor.take(len as usize).ok_or_else(truncated)?;
            if !(leaf.first_key..=leaf.last_key).contains(&key)
                || !(leaf.time_min..=leaf.time_max).contains(&time)
                || !(meta.first_seq..=meta.last_seq).contains(&seq)
                || previous.is_some_and(|previous| previous >= (key, time, seq))
            {
                return Err(corrupt("a record lies outside its leaf's ranges or out of order"));
            }
            previous = Some((key, time, seq));
            out.push(key, time, seq, value);
        }
        if cursor.at != block.len() {
            return Err(corrupt("bytes left after the last record"));
        }
    }
    Ok(())
}

/// Checks a whole segment file's bytes: footer, index, every leaf's
/// checksum, order and summary. Returns its meta. Used by `verify` and by
/// the fuzz target (through `format`); never panics on bad bytes.
pub(crate) fn check_bytes(path: &Path, bytes: &[u8]) -> Result<SegmentMeta> {
    let footer_at = bytes.len().saturating_sub(FOOTER_BYTES);
    let footer = decode_footer(path, bytes.len() as u64, &bytes[footer_at..])?;
    let meta_range = footer.meta_offset as usize..(footer.meta_offset + footer.meta_len) as usize;
    let (leaves, shadows) = decode_meta(path, &footer, &bytes[meta_range])?;
    let meta = meta_from(footer, leaves, shadows, bytes.len() as u64);
    let mut records = Records::default();
    decode_leaves(path, &meta, 0..meta.leaves.len(), bytes, &mut records)?;
    for i in 1..records.len() {
        if records.order(i - 1) >= records.order(i) {
            return Err(Error::corruption(
                path,
                0,
                format!("segment records {} and {i} out of order", i - 1),
            ));
        }
    }
    for (number, leaf) in meta.leaves.iter().enumerate() {
        let mut aggregate = Aggregate::default();
        for i in meta.record_range(number..number + 1) {
            aggregate.add(records.value(i));
        }
        // Bit for bit: summed in the order the writer summed them.
        let same = |a: f64, b: f64| a.to_bits() == b.to_bits();
        let [small, large] = aggregate.sum_parts();
        let [stored_small, stored_large] = leaf.aggregate.sum_parts();
        if aggregate.count != leaf.aggregate.count
            || aggregate.numeric != leaf.aggregate.numeric
            || !same(small, stored_small)
            || !same(large, stored_large)
            || !same(aggregate.min, leaf.aggregate.min)
            || !same(aggregate.max, leaf.aggregate.max)
        {
            return Err(Error::corruption(
                path,
                leaf.offset,
                format!("segment leaf {number}: its aggregate disagrees with its records"),
            ));
        }
    }
    Ok(meta)
}

/// What [`salvage`] reads of a segment whose footer and index are whole.
#[derive(Debug)]
pub struct Salvaged {
    /// Its footer and index.
    pub meta: SegmentMeta,
    /// The records of the leaves that read back whole, in order.
    pub records: Records,
    /// The leaves that did not (their summaries say where they were and
    /// how many records they held).
    pub bad_leaves: Vec<usize>,
}

/// Reads what can be read of the segment file at `path`: its footer and
/// index must be whole (else the error says why), then every leaf that
/// passes its checksum and checks. For repair.
pub fn salvage(fs: &dyn Fs, path: &Path) -> Result<Salvaged> {
    let file = fs.open_read(path)?;
    let len = file.len()? as usize;
    let mut bytes = Vec::with_capacity(len);
    file.read_exact_append(&mut bytes, len, 0)?;
    let footer_at = bytes.len().saturating_sub(FOOTER_BYTES);
    let footer = decode_footer(path, bytes.len() as u64, &bytes[footer_at..])?;
    let meta_range = footer.meta_offset as usize..(footer.meta_offset + footer.meta_len) as usize;
    let (leaves, shadows) = decode_meta(path, &footer, &bytes[meta_range])?;
    let meta = meta_from(footer, leaves, shadows, bytes.len() as u64);
    let mut records = Records::default();
    let mut bad_leaves = Vec::new();
    for number in 0..meta.leaves.len() {
        let leaf = &meta.leaves[number];
        let mut decoded = Records::default();
        let block = &bytes[leaf.offset as usize..];
        match decode_leaves(path, &meta, number..number + 1, block, &mut decoded) {
            Ok(()) => records.append(&decoded),
            Err(_) => bad_leaves.push(number),
        }
    }
    Ok(Salvaged {
        meta,
        records,
        bad_leaves,
    })
}

/// Rewrites the checksums in `bytes` (footer, then index, then leaves, as
/// far as each parses) so that a fuzzer's mutations reach the decoder's
/// structural checks instead of stopping at a checksum. For fuzzing and
/// tests only (through `format`).
pub(crate) fn reseal(bytes: &mut [u8]) {
    let path = Path::new("reseal");
    let len = bytes.len();
    if len < FOOTER_BYTES {
        return;
    }
    let seal_footer = |bytes: &mut [u8]| {
        let crc = crc32c(&bytes[len - FOOTER_BYTES..len - 4]);
        bytes[len - 4..].copy_from_slice(&crc.to_le_bytes());
    };
    seal_footer(bytes);
    let Ok(mut footer) = decode_footer(path, len as u64, &bytes[len - FOOTER_BYTES..]) else {
        return;
    };
    let meta = footer.meta_offset as usize..(footer.meta_offset + footer.meta_len) as usize;
    footer.meta_crc = block_crc(footer.id, footer.meta_offset, &bytes[meta.clone()]);
    // Leaf checksums live in the index: fix them there, then seal the index.
    if let Ok((leaves, _)) = decode_meta(path, &footer, &bytes[meta.clone()]) {
        for (number, leaf) in leaves.iter().enumerate() {
            let Some(block) = bytes.get(leaf.offset as usize..leaf.offset as usize + leaf.len as usize)
            else {
                break;
            };
            let crc = block_crc(footer.id, leaf.offset, block);
            let at = meta.start + number * SUMMARY_BYTES + 12;
            bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        }
    }
    let crc = block_crc(footer.id, footer.meta_offset, &bytes[meta]);
    bytes[len - 8..len - 4].copy_from_slice(&crc.to_le_bytes());
    seal_footer(bytes);
}

fn meta_from(footer: Footer, leaves: Vec<LeafSummary>, shadows: Vec<Shadow>, bytes: u64) -> SegmentMeta {
    SegmentMeta {
        id: footer.id,
        store_id: footer.store_id,
        first_seq: footer.first_seq,
        last_seq: footer.last_seq,
        records: footer.records,
        leaf_records: footer.leaf_records,
        leaves,
        shadows,
        bytes,
    }
}

impl Resident for Segment {
    fn evict(&self) {
        *sync::lock(&self.resident) = None;
    }
}

/// An open segment file: its meta in memory, its records decoded into the
/// cache or read on demand. Or, with no file, a tier: segments merged in
/// memory, always resident (see `crate::tier`).
#[derive(Debug)]
pub struct Segment {
    /// What it holds.
    pub meta: SegmentMeta,
    path: PathBuf,
    file: Option<Box<dyn FsFile>>,
    cache: Arc<Cache>,
    /// The decoded records, when held in memory.
    resident: Mutex<Option<Arc<Records>>>,
    /// `meta.ranges()`, computed once: every query prunes by it. For a
    /// damaged segment, the extent its manifest entry records.
    ranges: Option<(u64, u64, u64, u64)>,
    /// Why a listed segment could not be opened (a store opened read-only
    /// keeps it in its place, so that the queries it could change fail).
    damage: Option<Damage>,
}

/// A listed segment that could not be opened: the error it gave.
#[derive(Debug, Clone)]
struct Damage {
    file: PathBuf,
    offset: u64,
    what: String,
}

impl Segment {
    /// Opens the segment file at `path`, checking its footer and index.
    pub fn open(fs: &dyn Fs, path: &Path, cache: Arc<Cache>) -> Result<Arc<Segment>> {
        let file = fs.open_read(path)?;
        let len = file.len()?;
        let mut footer_bytes = vec![0u8; FOOTER_BYTES.min(len as usize)];
        let footer_at = len - footer_bytes.len() as u64;
        file.read_exact_at(&mut footer_bytes, footer_at)?;
        let footer = decode_footer(path, len, &footer_bytes)?;
        let mut meta = vec![0u8; footer.meta_len as usize];
        file.read_exact_at(&mut meta, footer.meta_offset)?;
        let (leaves, shadows) = decode_meta(path, &footer, &meta)?;
        let meta = meta_from(footer, leaves, shadows, len);
        Ok(Arc::new(Segment {
            ranges: meta.ranges(),
            meta,
            path: path.to_path_buf(),
            file: Some(file),
            cache,
            resident: Mutex::new(None),
            damage: None,
        }))
    }

    /// A listed segment that failed to open with `error`, standing in
    /// its place: `meta` holds what the manifest says of it (no leaves),
    /// `extent` where its records and shadows lie. Queries whose bounds
    /// meet the extent fail with `error` (their answer could be wrong
    /// without it); the others go on.
    pub(crate) fn damaged(
        meta: SegmentMeta,
        extent: Option<Extent>,
        path: &Path,
        error: &Error,
        cache: Arc<Cache>,
    ) -> Arc<Segment> {
        let (offset, what) = match error {
            Error::Corruption { offset, what, .. } => (*offset, what.clone()),
            other => (0, other.to_string()),
        };
        Arc::new(Segment {
            ranges: extent.map(|extent| (extent.key_min, extent.key_max, extent.time_min, extent.time_max)),
            meta,
            path: path.to_path_buf(),
            file: None,
            cache,
            resident: Mutex::new(None),
            damage: Some(Damage {
                file: path.to_path_buf(),
                offset,
                what,
            }),
        })
    }

    /// Fails, naming the file, if it is damaged and a query within
    /// `bounds` could need it.
    pub(crate) fn check_damage(&self, bounds: &Bounds) -> Result<()> {
        match &self.damage {
            Some(damage) if self.may_match(bounds) => Err(Error::corruption(
                &damage.file,
                damage.offset,
                format!(
                    "{} (this query needs the segment; queries of keys and times it does not \
                     hold still work; `spillway stream repair` salvages the rest)",
                    damage.what
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Records held only in memory, as a segment (`meta` from
    /// [`meta_in_memory`]); `label` names it in errors.
    pub(crate) fn in_memory(
        meta: SegmentMeta,
        records: Arc<Records>,
        label: PathBuf,
        cache: Arc<Cache>,
    ) -> Arc<Segment> {
        Arc::new(Segment {
            ranges: meta.ranges(),
            meta,
            path: label,
            file: None,
            cache,
            resident: Mutex::new(Some(records)),
            damage: None,
        })
    }

    /// Its records, if they are in memory.
    pub(crate) fn resident(&self) -> Option<Arc<Records>> {
        sync::lock(&self.resident).clone()
    }

    /// Drops its records from memory and from the cache's count (they
    /// were merged into a tier, which holds them now).
    pub(crate) fn release(self: &Arc<Self>) {
        if self.file.is_some() {
            *sync::lock(&self.resident) = None;
            self.cache.forget(&(Arc::downgrade(self) as Weak<dyn Resident>));
        }
    }

    /// Whether anything in it may match `bounds`.
    pub fn may_match(&self, bounds: &Bounds) -> bool {
        self.ranges.is_some_and(|(key_min, key_max, time_min, time_max)| {
            bounds.overlaps(key_min, key_max, time_min, time_max)
        })
    }

    /// Whether every record's time is within `bounds`' times (so only
    /// keys need checking).
    pub fn times_within(&self, bounds: &Bounds) -> bool {
        self.ranges.is_some_and(|(_, _, time_min, time_max)| {
            bounds.time_low <= time_min && time_max <= bounds.time_high
        })
    }

    /// The records of leaves `leaves`: the decoded segment and the range
    /// of its records that they are.
    pub fn leaves(self: &Arc<Self>, leaves: Range<usize>) -> Result<(Arc<Records>, Range<usize>)> {
        if leaves.is_empty() {
            return Ok((Arc::default(), 0..0));
        }
        if let Some(records) = self.resident() {
            return Ok((records, self.meta.record_range(leaves)));
        }
        if self.cache.budget() == 0 {
            let records = Arc::new(self.read(leaves)?);
            let len = records.len();
            return Ok((records, 0..len));
        }
        let records = Arc::new(self.read(0..self.meta.leaves.len())?);
        self.adopt(records.clone());
        Ok((records, self.meta.record_range(leaves)))
    }

    /// Keeps `records`, this segment's whole decoded content, in memory
    /// (within the cache's budget): a flushed buffer hands its records to
    /// its segment so that the first queries need not read them back.
    pub fn adopt(self: &Arc<Self>, records: Arc<Records>) {
        if self.cache.budget() == 0 {
            return;
        }
        let mut resident = sync::lock(&self.resident);
        if resident.is_none() {
            let bytes = records.heap_bytes();
            *resident = Some(records);
            drop(resident);
            self.cache
                .admit(Arc::downgrade(self) as Weak<dyn Resident>, bytes);
        }
    }

    fn read(&self, leaves: Range<usize>) -> Result<Records> {
        let Some(file) = &self.file else {
            spillway_core::bail!(
                Internal,
                "{}: a tier's records are no longer in memory",
                self.path.display()
            );
        };
        let first = &self.meta.leaves[leaves.start];
        let last = &self.meta.leaves[leaves.end - 1];
        let len = (last.offset + last.len as u64 - first.offset) as usize;
        let mut bytes = Vec::with_capacity(len);
        file.read_exact_append(&mut bytes, len, first.offset)?;
        let mut records = Records::with_capacity(self.meta.record_range(leaves.clone()).len(), len);
        decode_leaves(&self.path, &self.meta, leaves, &bytes, &mut records)?;
        Ok(records)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::SimFs;

    fn sample_segment() -> Vec<u8> {
        let fs = SimFs::new();
        let mut records = Records::default();
        for i in 0..50u64 {
            records.push(i / 2, i, 100 + i, &(i as f64).to_le_bytes()[..(i % 9) as usize]);
        }
        let shadows = [Shadow {
            key: 3,
            time: 7,
            seq: 120,
        }];
        let path = Path::new("/1.seg");
        let meta = write(&fs, path, 1, 7, (100, 160), &records, &shadows, 8).unwrap();
        let file = fs.open_read(path).unwrap();
        let mut bytes = Vec::new();
        file.read_exact_append(&mut bytes, meta.bytes as usize, 0)
            .unwrap();
        assert_eq!(check_bytes(path, &bytes).unwrap(), meta);
        bytes
    }

    #[test]
    fn resealed_mutations_of_a_segment_are_refused_or_decoded_never_a_panic() {
        let original = sample_segment();
        let mut resealed = original.clone();
        reseal(&mut resealed);
        assert_eq!(resealed, original, "resealing a good segment changes nothing");
        let mut next = crate::entry::xorshift(0x9e37_79b9_7f4a_7c15);
        let mut refused = 0;
        for _ in 0..3000 {
            let mut bytes = original.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % bytes.len() as u64) as usize;
                bytes[at] = next() as u8;
            }
            if next().is_multiple_of(8) {
                bytes.truncate((next() % bytes.len() as u64) as usize);
            }
            reseal(&mut bytes);
            if let Err(error) = check_bytes(Path::new("x.seg"), &bytes) {
                assert_eq!(error.kind(), spillway_core::ErrorKind::Corruption, "{error}");
                refused += 1;
            }
        }
        assert!(refused > 1000, "most mutations break an invariant: {refused}");
    }
}
