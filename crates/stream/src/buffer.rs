//! The buffers: a buffer's records in arrival order (its columns), their
//! index (a template B+ tree, or a B+ tree grown with splits), its log,
//! and what a query may see of it.

use std::ops::Range;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

use spillway_core::sync;
use spillway_core::Result;

use crate::batch::{Batch, Op};
use crate::bptree::BPlusTree;
use crate::options::{Options, TemplatePolicy};
use crate::records::{Bounds, Records, Shadow};
use crate::template::TemplateTree;
use crate::wal::{Wal, WalSync};

/// The bytes a record costs in a buffer beyond its value: its entry in
/// the tree (32 bytes, in leaves about 70% full), its op and value offset.
pub(crate) const RECORD_OVERHEAD_BYTES: usize = 56;

/// A buffer tree's entry: the record's key and time, where it is in the
/// buffer, its op, and its value itself when that is 8 bytes or shorter
/// (numbers, most often). Entries in key order point all over the
/// buffer's columns, so a query that had to read each record's op and
/// value there would miss the cache two or three times per record; with
/// them in the entry, it reads the leaves and nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct BufferEntry {
    pub(crate) key: u64,
    pub(crate) time: u64,
    /// The location (bits 8 and up; unique, so entries order by key,
    /// time and location), the op (bits 4-7) and the inline value's
    /// length (bits 0-3, [`NOT_INLINE`] for a longer value).
    pub(crate) tag: u64,
    pub(crate) value: [u8; 8],
}

/// The length a [`BufferEntry`] notes for a value kept in the columns.
pub(crate) const NOT_INLINE: u64 = 0xf;

impl BufferEntry {
    pub(crate) fn new(key: u64, time: u64, location: u64, op: Op, value: &[u8]) -> Self {
        debug_assert!(location < 1 << 56, "a buffer holds fewer records");
        let mut inline = [0; 8];
        let length = match inline.get_mut(..value.len()) {
            Some(prefix) => {
                prefix.copy_from_slice(value);
                value.len() as u64
            }
            None => NOT_INLINE,
        };
        BufferEntry {
            key,
            time,
            tag: location << 8 | (op as u64) << 4 | length,
            value: inline,
        }
    }

    pub(crate) fn location(&self) -> u64 {
        self.tag >> 8
    }

    pub(crate) fn op(&self) -> Op {
        Op::from_byte(((self.tag >> 4) & 0xf) as u8).expect("entries hold ops")
    }

    /// The length of the value, if it is held inline.
    pub(crate) fn inline_len(&self) -> Option<usize> {
        match self.tag & 0xf {
            NOT_INLINE => None,
            length => Some(length as usize),
        }
    }

    /// The value, if it is held inline.
    pub(crate) fn inline_value(&self) -> Option<&[u8]> {
        self.inline_len().map(|length| &self.value[..length])
    }
}

impl crate::entry::Indexed for BufferEntry {
    #[inline]
    fn key(&self) -> u64 {
        self.key
    }
}

/// The index of a buffer.
#[derive(Debug)]
pub(crate) enum BufferTree {
    /// An ordinary B+ tree, grown under one lock.
    Growing(Mutex<BPlusTree<BufferEntry>>),
    /// A template, filled under per-leaf locks (the lock around it is
    /// taken shared by inserts and reads, and exclusively only to replace
    /// it by a rebuilt one).
    Template(RwLock<TemplateTree<BufferEntry>>),
}

impl BufferTree {
    pub(crate) fn insert_batch(&self, entries: &[BufferEntry]) {
        match self {
            BufferTree::Growing(tree) => {
                let mut tree = sync::lock(tree);
                entries.iter().for_each(|entry| tree.insert(*entry));
            }
            BufferTree::Template(tree) => sync::read(tree).insert_batch(entries),
        }
    }

    /// Appends to `out` the entries with keys from `low` to `high`.
    pub(crate) fn extend_range(&self, low: u64, high: u64, out: &mut Vec<BufferEntry>) {
        match self {
            BufferTree::Growing(tree) => sync::lock(tree).range(low, high, |entry| out.push(*entry)),
            BufferTree::Template(tree) => sync::read(tree).extend_range(low, high, out),
        }
    }

    /// Under the rebuild policy, replaces a template that keys have
    /// drifted away from by one made from the keys so far, sized for the
    /// `expected_entries` the buffer will hold; returns whether it did.
    pub(crate) fn rebuild_if_stretched(&self, options: &Options, expected_entries: usize) -> bool {
        let (BufferTree::Template(tree), TemplatePolicy::Rebuild { threshold }) = (self, options.template)
        else {
            return false;
        };
        TemplateTree::rebuild_if_stretched(tree, expected_entries, threshold, options.fan_out, options.fill)
    }
}

/// The records of a buffer, in arrival order, and its log.
#[derive(Debug)]
pub(crate) struct BufferData {
    /// `None` in a store opened read-only.
    pub(crate) wal: Option<Wal>,
    pub(crate) ops: Vec<Op>,
    pub(crate) value_ends: Vec<u64>,
    pub(crate) values: Vec<u8>,
    /// The batches being written (first sequence number, writes): a query
    /// skips them, so it sees each batch whole or not at all.
    pub(crate) in_flight: Vec<(u64, u64)>,
}

impl BufferData {
    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.values.len() + self.ops.len() * RECORD_OVERHEAD_BYTES
    }

    /// Appends the batch's ops and values (its entries go into the tree
    /// apart: [`Buffer::index`]).
    pub(crate) fn push_batch(&mut self, batch: &Batch) {
        self.ops.extend_from_slice(&batch.ops);
        let base = self.values.len() as u64;
        self.value_ends
            .extend(batch.value_ends.iter().map(|&end| base + end as u64));
        self.values.extend_from_slice(&batch.values);
    }

    /// What the buffer will hold when full, at the mean size so far.
    pub(crate) fn expected_entries(&self, options: &Options) -> usize {
        (self.len() as f64 * options.buffer_bytes as f64 / self.bytes() as f64) as usize
    }

    /// Appends the records of `entries` (this buffer's, the first at
    /// `first_seq`; no deletes) to `records`. Entries that all hold 8-byte
    /// values (numbers, most often) are copied column by column in one
    /// pass. A value not held in its entry is read from the columns, which
    /// misses the cache: done in chunks of two passes, which keep the
    /// misses independent of each other for the processor to overlap (the
    /// value bounds of a chunk, then its values).
    pub(crate) fn copy_records(&self, first_seq: u64, entries: &[BufferEntry], records: &mut Records) {
        debug_assert!(entries.iter().all(|entry| entry.op() != Op::Delete));
        if entries.iter().all(|entry| entry.inline_len() == Some(8)) {
            let mut out = records.push_fixed::<8>(entries.len());
            for ((key, time, seq, value), entry) in out.slots().zip(entries) {
                (*key, *time, *seq, *value) =
                    (entry.key, entry.time, first_seq + entry.location(), entry.value);
            }
            return;
        }
        const CHUNK: usize = 1024;
        records.reserve(entries.len(), entries.len() * size_of::<u64>());
        let mut bounds: Vec<Range<usize>> = Vec::new();
        for chunk in entries.chunks(CHUNK) {
            bounds.clear();
            bounds.extend(
                chunk
                    .iter()
                    .filter(|entry| entry.inline_value().is_none())
                    .map(|entry| self.value_range(entry.location() as usize)),
            );
            let mut held_apart = bounds.drain(..);
            for entry in chunk {
                let value = match entry.inline_value() {
                    Some(value) => value,
                    None => &self.values[held_apart.next().expect("bounds for every value held apart")],
                };
                records.push(entry.key, entry.time, first_seq + entry.location(), value);
            }
        }
    }

    pub(crate) fn value_range(&self, location: usize) -> Range<usize> {
        let start = if location == 0 {
            0
        } else {
            self.value_ends[location - 1] as usize
        };
        start..self.value_ends[location] as usize
    }
}

/// The active buffer: records from `first_seq` on, entry `location` being
/// write `first_seq + location`.
#[derive(Debug)]
pub(crate) struct Buffer {
    pub(crate) first_seq: u64,
    pub(crate) log_number: u64,
    pub(crate) tree: BufferTree,
    pub(crate) data: Mutex<BufferData>,
    pub(crate) wal_sync: Option<Arc<WalSync>>,
    /// How far the flusher has synced the log in the background (a store
    /// without `sync`).
    pub(crate) synced_in_background: AtomicU64,
}

impl Buffer {
    /// A buffer of writes from `first_seq` on, logged to `wal` (none:
    /// replayed, or read-only), indexed by `template` (none: as the policy
    /// starts).
    pub(crate) fn new(
        options: &Options,
        first_seq: u64,
        wal: Option<Wal>,
        template: Option<TemplateTree<BufferEntry>>,
    ) -> Buffer {
        let tree = match (template, options.template) {
            (Some(template), _) => BufferTree::Template(RwLock::new(template)),
            // With nothing to go on, the rebuild policy starts from one
            // leaf and cuts it within the buffer from the keys it gets.
            (None, TemplatePolicy::Rebuild { .. }) => {
                BufferTree::Template(RwLock::new(TemplateTree::single_leaf(options.leaf_capacity)))
            }
            (None, _) => {
                BufferTree::Growing(Mutex::new(BPlusTree::new(options.fan_out, options.leaf_capacity)))
            }
        };
        let expected_records = options.buffer_bytes / (RECORD_OVERHEAD_BYTES + 8);
        Buffer {
            first_seq,
            log_number: wal.as_ref().map_or(0, Wal::number),
            tree,
            wal_sync: wal.as_ref().map(|wal| wal.sync().clone()),
            synced_in_background: AtomicU64::new(0),
            data: Mutex::new(BufferData {
                wal,
                ops: Vec::with_capacity(expected_records),
                value_ends: Vec::with_capacity(expected_records),
                values: Vec::new(),
                in_flight: Vec::new(),
            }),
        }
    }

    /// The sorted, resolved records of a buffer and its shadows.
    pub(crate) fn drain(&self) -> (Records, Vec<Shadow>) {
        let mut entries = Vec::new();
        self.tree.extend_range(0, u64::MAX, &mut entries);
        if !entries.is_sorted() {
            entries.sort_unstable();
        }
        let data = sync::lock(&self.data);
        let mut records = Records::with_capacity(entries.len(), data.values.len());
        let mut shadows = Vec::new();
        // The records to write, copied a chunk at a time.
        const KEPT_CHUNK: usize = 4096;
        let mut kept: Vec<BufferEntry> = Vec::with_capacity(KEPT_CHUNK);
        let mut group_start = 0;
        while group_start < entries.len() {
            let first = entries[group_start];
            let group_end = group_start
                + entries[group_start..]
                    .iter()
                    .take_while(|entry| (entry.key, entry.time) == (first.key, first.time))
                    .count();
            let group = &entries[group_start..group_end];
            let newest_shadow = group.iter().rposition(|entry| entry.op().shadows());
            if let Some(at) = newest_shadow {
                shadows.push(Shadow {
                    key: first.key,
                    time: first.time,
                    seq: self.first_seq + group[at].location(),
                });
            }
            kept.extend(
                group[newest_shadow.unwrap_or(0)..]
                    .iter()
                    .filter(|entry| entry.op() != Op::Delete),
            );
            if kept.len() >= KEPT_CHUNK {
                data.copy_records(self.first_seq, &kept, &mut records);
                kept.clear();
            }
            group_start = group_end;
        }
        data.copy_records(self.first_seq, &kept, &mut records);
        (records, shadows)
    }

    /// Indexes `batch`, whose writes are this buffer's from `location` on;
    /// returns whether the tree was rebuilt (see [`BufferTree`]).
    pub(crate) fn index(
        &self,
        batch: &Batch,
        location: u64,
        options: &Options,
        expected_entries: usize,
    ) -> bool {
        let entries: Vec<BufferEntry> = (0..batch.len())
            .map(|i| {
                BufferEntry::new(
                    batch.keys[i],
                    batch.times[i],
                    location + i as u64,
                    batch.ops[i],
                    batch.value(i),
                )
            })
            .collect();
        self.tree.insert_batch(&entries);
        self.tree.rebuild_if_stretched(options, expected_entries)
    }

    /// Adds `batch`, read back from a log (its writes numbered from
    /// `first_seq`, which must continue the buffer's), to a buffer that
    /// has no log. Returns whether the tree was rebuilt.
    pub(crate) fn insert_replayed(&self, batch: &Batch, first_seq: u64, options: &Options) -> Result<bool> {
        let mut data = sync::lock(&self.data);
        let location = data.len() as u64;
        if first_seq != self.first_seq + location {
            spillway_core::bail!(
                Internal,
                "replayed writes from seq {first_seq} into a buffer at seq {}",
                self.first_seq + location
            );
        }
        data.push_batch(batch);
        let expected_entries = data.expected_entries(options);
        drop(data);
        Ok(self.index(batch, location, options, expected_entries))
    }

    /// What a query starting now may see of this buffer.
    pub(crate) fn visible(&self) -> Visible {
        let data = sync::lock(&self.data);
        Visible {
            below: self.first_seq + data.len() as u64,
            in_flight: data.in_flight.clone(),
        }
    }

    /// The buffer's writes within `bounds` that `visible` lets a query
    /// see: its records into `records`, its updates' and deletes' shadows
    /// into `shadows`.
    pub(crate) fn collect(
        &self,
        bounds: &Bounds,
        visible: &Visible,
        records: &mut Records,
        shadows: &mut Vec<Shadow>,
    ) {
        let mut entries = Vec::new();
        self.tree
            .extend_range(bounds.key_low, bounds.key_high, &mut entries);
        entries.retain(|entry| {
            bounds.contains(entry.key, entry.time) && visible.sees(self.first_seq + entry.location())
        });
        // (key, time, location) order is (key, time, seq) order. A
        // template's range gives it; a grown tree keeps equal keys in
        // arrival order, not by time.
        if !entries.is_sorted() {
            entries.sort_unstable();
        }
        shadows.extend(
            entries
                .iter()
                .filter(|entry| entry.op().shadows())
                .map(|entry| Shadow {
                    key: entry.key,
                    time: entry.time,
                    seq: self.first_seq + entry.location(),
                }),
        );
        entries.retain(|entry| entry.op() != Op::Delete);
        sync::lock(&self.data).copy_records(self.first_seq, &entries, records);
    }
}

/// The writes of a buffer that a query may see: those written before it
/// started, less the batches still being written then.
#[derive(Debug)]
pub(crate) struct Visible {
    pub(crate) below: u64,
    pub(crate) in_flight: Vec<(u64, u64)>,
}

impl Visible {
    pub(crate) fn sees(&self, seq: u64) -> bool {
        seq < self.below
            && !self
                .in_flight
                .iter()
                .any(|&(first, writes)| (first..first + writes).contains(&seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_entry_holds_short_values_and_its_op_and_orders_by_key_time_and_location() {
        for (op, value) in [
            (Op::Append, &b""[..]),
            (Op::Update, &b"12345678"[..]),
            (Op::Delete, &b"x"[..]),
        ] {
            let entry = BufferEntry::new(7, 9, (1 << 56) - 1, op, value);
            assert_eq!((entry.key, entry.time, entry.location()), (7, 9, (1 << 56) - 1));
            assert_eq!((entry.op(), entry.inline_value()), (op, Some(value)));
        }
        let long = BufferEntry::new(7, 9, 3, Op::Append, b"123456789");
        assert_eq!((long.op(), long.inline_value()), (Op::Append, None));
        let earlier = BufferEntry::new(7, 9, 2, Op::Delete, &[0xff; 8]);
        assert!(earlier < long, "the location breaks ties, not the op or value");
        assert!(BufferEntry::new(6, 10, 9, Op::Append, b"") < earlier);
        assert!(BufferEntry::new(7, 8, 9, Op::Append, b"") < earlier);
    }
}
