//! The root buffer (seed 001 §3.1): records appended in memory as they
//! arrive, found by GETs through a small hash index, and sorted by hash
//! and collapsed when the buffer spills.
//!
//! Flat and allocation-free per record: every record's bytes go to one
//! arena, every record gets a 16-byte entry, and the index is an
//! open-addressing table of entry numbers keyed by the key's hash (which is
//! already a good hash). Records of colliding keys, and older records of
//! the same key, are chained through their entries, newest first.
//!
//! ```text
//! arena record = kind u8 | key length varint | value length varint | key | value
//! ```

use std::sync::Arc;

use spillway_core::{Hash64, Result};

use crate::collapse::Source;
use crate::record::{self, Kind, RecordRef};

/// No older entry with the same hash.
const NONE: u32 = u32::MAX;
/// Bytes of the fixed part of an entry.
const ENTRY_BYTES: usize = size_of::<Entry>();
/// The largest arena: entries hold 32-bit offsets.
pub const ROOT_BYTES_MAX: usize = 1 << 31;

#[derive(Debug, Clone, Copy)]
struct Entry {
    hash: Hash64,
    /// Where the record starts in the arena.
    offset: u32,
    /// The next older entry with the same hash, or [`NONE`].
    older: u32,
}

/// An in-memory root buffer.
#[derive(Debug, Clone)]
pub struct RootBuffer {
    arena: Vec<u8>,
    entries: Vec<Entry>,
    /// Open addressing: entry number + 1 of the newest entry of a hash, 0 empty.
    table: Vec<u32>,
}

impl Default for RootBuffer {
    fn default() -> Self {
        RootBuffer {
            arena: Vec::new(),
            entries: Vec::new(),
            table: vec![0; 1024],
        }
    }
}

impl RootBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes the buffer accounts for: records, entries and the index.
    pub fn bytes(&self) -> usize {
        self.arena.len() + self.entries.len() * ENTRY_BYTES + self.table.len() * 4
    }

    /// Appends a record (checked by the caller: the arena stays below
    /// [`ROOT_BYTES_MAX`]).
    pub fn insert(&mut self, hash: Hash64, kind: Kind, key: &[u8], value: &[u8]) {
        assert!(
            self.arena.len() < ROOT_BYTES_MAX,
            "root buffer over {ROOT_BYTES_MAX} bytes"
        );
        let number = self.entries.len() as u32;
        let offset = self.arena.len() as u32;
        record::encode_body(kind, key, value, &mut self.arena);
        if (self.entries.len() + 1) * 2 > self.table.len() {
            self.grow_table();
        }
        let older = self.link(hash, number);
        self.entries.push(Entry { hash, offset, older });
    }

    /// Makes entry `number` the newest of its hash in the table; returns
    /// the entry it replaces there.
    fn link(&mut self, hash: Hash64, number: u32) -> u32 {
        let mask = self.table.len() - 1;
        let mut slot = hash as usize & mask;
        loop {
            match self.table[slot] {
                0 => {
                    self.table[slot] = number + 1;
                    return NONE;
                }
                held if self.entries[held as usize - 1].hash == hash => {
                    self.table[slot] = number + 1;
                    return held - 1;
                }
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    fn grow_table(&mut self) {
        let heads: Vec<u32> = self
            .table
            .iter()
            .filter(|&&held| held != 0)
            .map(|&held| held - 1)
            .collect();
        self.table = vec![0; self.table.len() * 2];
        for head in heads {
            let hash = self.entries[head as usize].hash;
            self.link(hash, head);
        }
    }

    fn record(&self, number: u32) -> RecordRef<'_> {
        let entry = self.entries[number as usize];
        let ((kind, key, value), _) =
            record::decode_body(&self.arena[entry.offset as usize..]).expect("the arena holds whole records");
        RecordRef {
            hash: entry.hash,
            kind,
            key,
            value,
        }
    }

    /// Calls `visit` with the records of `key`, newest first, while it
    /// returns `true`.
    pub fn get(&self, hash: Hash64, key: &[u8], mut visit: impl FnMut(Kind, &[u8]) -> bool) {
        let mask = self.table.len() - 1;
        let mut slot = hash as usize & mask;
        let mut number = loop {
            match self.table[slot] {
                0 => return,
                held if self.entries[held as usize - 1].hash == hash => break held - 1,
                _ => slot = (slot + 1) & mask,
            }
        };
        while number != NONE {
            let record = self.record(number);
            if record.key == key && !visit(record.kind, record.value) {
                return;
            }
            number = self.entries[number as usize].older;
        }
    }

    /// The records in (hash, key) order, older first among records of one
    /// key, as entry numbers.
    pub fn sorted(&self) -> Vec<u32> {
        let mut order: Vec<(Hash64, u32)> = self
            .entries
            .iter()
            .enumerate()
            .map(|(number, entry)| (entry.hash, number as u32))
            .collect();
        order.sort_unstable();
        // Runs of equal hashes (colliding keys, or one key written again)
        // go by key, then age; they are short.
        let mut start = 0;
        while start < order.len() {
            let hash = order[start].0;
            let end = start + order[start..].partition_point(|&(other, _)| other == hash);
            if end - start > 1 {
                order[start..end]
                    .sort_by(|a, b| (self.record(a.1).key, a.1).cmp(&(self.record(b.1).key, b.1)));
            }
            start = end;
        }
        order.into_iter().map(|(_, number)| number).collect()
    }
}

/// A root buffer's records in (hash, key) order, within a hash range: a
/// [`Source`] for spills and scans.
#[derive(Debug)]
pub struct SortedRun {
    root: Arc<RootBuffer>,
    /// Its entry numbers in (hash, key, age) order ([`RootBuffer::sorted`]).
    order: Arc<Vec<u32>>,
    end: usize,
    /// The current position; `None` before the first `advance`.
    at: Option<usize>,
    first: usize,
}

impl SortedRun {
    /// The records of `root` (sorted as `order`) with hashes in `low..=high`.
    pub fn new(root: Arc<RootBuffer>, order: Arc<Vec<u32>>, low: Hash64, high: Hash64) -> Self {
        let first = order.partition_point(|&number| root.entries[number as usize].hash < low);
        let end = order.partition_point(|&number| root.entries[number as usize].hash <= high);
        SortedRun {
            end: end.max(first),
            first,
            root,
            order,
            at: None,
        }
    }
}

impl Source for SortedRun {
    fn record(&self) -> Option<RecordRef<'_>> {
        let at = self.at?;
        (at < self.end).then(|| self.root.record(self.order[at]))
    }

    fn advance(&mut self) -> Result<()> {
        self.at = Some(self.at.map_or(self.first, |at| at + 1));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collapse::Merger;

    fn versions(root: &RootBuffer, hash: Hash64, key: &[u8]) -> Vec<(Kind, Vec<u8>)> {
        let mut found = Vec::new();
        root.get(hash, key, |kind, value| {
            found.push((kind, value.to_vec()));
            true
        });
        found
    }

    #[test]
    fn gets_find_every_version_newest_first_and_tell_colliding_keys_apart() {
        let mut root = RootBuffer::new();
        for i in 0..5000u64 {
            root.insert(i * 7, Kind::Put, &i.to_le_bytes(), b"v");
        }
        root.insert(14, Kind::Put, b"other key, same hash", b"x");
        root.insert(14, Kind::Delete, &2u64.to_le_bytes(), b"");
        root.insert(14, Kind::Put, &2u64.to_le_bytes(), b"again");
        assert_eq!(root.len(), 5003);
        assert_eq!(
            versions(&root, 14, &2u64.to_le_bytes()),
            vec![
                (Kind::Put, b"again".to_vec()),
                (Kind::Delete, Vec::new()),
                (Kind::Put, b"v".to_vec())
            ]
        );
        assert_eq!(
            versions(&root, 14, b"other key, same hash"),
            vec![(Kind::Put, b"x".to_vec())]
        );
        assert!(versions(&root, 15, b"absent").is_empty());
        assert_eq!(versions(&root, 4999 * 7, &4999u64.to_le_bytes()).len(), 1);
        assert!(root.bytes() >= root.arena.len() + 5003 * 16);
    }

    #[test]
    fn a_sorted_run_collapses_to_one_record_per_key_in_hash_then_key_order() {
        let mut root = RootBuffer::new();
        root.insert(9, Kind::Put, b"b", b"1");
        root.insert(3, Kind::Put, b"a", b"1");
        root.insert(9, Kind::Put, b"a", b"1");
        root.insert(9, Kind::Put, b"b", b"2");
        root.insert(3, Kind::Delete, b"a", b"");
        let root = Arc::new(root);
        let order = Arc::new(root.sorted());
        let run = SortedRun::new(root.clone(), order.clone(), 0, u64::MAX);
        let mut merger = Merger::new(vec![Box::new(run)], None).unwrap();
        let mut out = Vec::new();
        while let Some(record) = merger.next_record().unwrap() {
            out.push((
                record.hash,
                record.kind,
                record.key.to_vec(),
                record.value.to_vec(),
            ));
        }
        assert_eq!(
            out,
            vec![
                (3, Kind::Delete, b"a".to_vec(), Vec::new()),
                (9, Kind::Put, b"a".to_vec(), b"1".to_vec()),
                (9, Kind::Put, b"b".to_vec(), b"2".to_vec()),
            ]
        );
        let part = SortedRun::new(root, order, 4, 9);
        let mut merger = Merger::new(vec![Box::new(part)], None).unwrap();
        let mut count = 0;
        while merger.next_record().unwrap().is_some() {
            count += 1;
        }
        assert_eq!(count, 2);
    }
}
